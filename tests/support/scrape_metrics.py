"""Scrapes an `ateam controller --metrics` endpoint the way Prometheus tooling reads it.

Usage: scrape_metrics.py http://127.0.0.1:PORT

Prints one JSON object: every sample as [name, labels, value] (parsed by the Python
`prometheus_client` parser, Debian's python3-prometheus-client), the families and their
types, and the HTTP status of a path that is not /metrics.
"""

import json
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main(base):
    with urllib.request.urlopen(base + "/metrics", timeout=20) as r:
        content_type = r.headers.get("Content-Type")
        body = r.read().decode("utf-8")
    families = list(text_string_to_metric_families(body))
    try:
        urllib.request.urlopen(base + "/other", timeout=20)
        other = 200
    except urllib.error.HTTPError as e:
        other = e.code
    print(json.dumps({
        "contentType": content_type,
        "families": {f.name: f.type for f in families},
        "samples": [[s.name, s.labels, s.value] for f in families for s in f.samples],
        "otherPath": other,
    }))


if __name__ == "__main__":
    main(sys.argv[1])
