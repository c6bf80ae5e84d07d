"""A minimal generation client for tests: reads the endpoints file, asks each model, writes JSONL."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fake_client")
    p.add_argument("--endpoints", required=True)
    p.add_argument("--out")
    p.add_argument("--records", type=int, default=3, help="records per model alias")
    p.add_argument("--preflight", action="store_true", help="check the endpoints file only; no model calls")
    p.add_argument("--exit-code", type=int, default=0, help="exit with this code after writing")
    p.add_argument("--hang", action="store_true", help="never finish")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds to wait before doing anything")
    p.add_argument("--tag", default=None, help="written into every record (e.g. {shard_index}/{num_shards})")
    return p.parse_args(argv)


def load_endpoints(path: str) -> dict[str, list[str]]:
    with open(path) as handle:
        data = json.load(handle)
    models = data["models"]
    if not models or not all(isinstance(v["base_urls"], list) and v["base_urls"] for v in models.values()):
        raise ValueError("every model alias needs at least one base URL")
    return {alias: spec["base_urls"] for alias, spec in models.items()}


def chat(base_url: str, alias: str, prompt: str) -> str:
    body = {"model": alias, "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}]}
    request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        reply = json.load(response)
    return reply["choices"][0]["message"]["content"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    time.sleep(args.sleep)
    endpoints = load_endpoints(args.endpoints)
    if args.preflight:
        print(f"preflight {'ok' if args.exit_code == 0 else 'failed'}: {sorted(endpoints)}", flush=True)
        return args.exit_code
    while args.hang:
        time.sleep(3600)
    with open(args.out, "w") as out:
        for alias, urls in sorted(endpoints.items()):
            for index in range(args.records):
                text = chat(urls[index % len(urls)], alias, f"record {index}")
                record = {"alias": alias, "index": index, "text": text}
                out.write(json.dumps(record if args.tag is None else {**record, "tag": args.tag}) + "\n")
    print(f"wrote {args.records * len(endpoints)} records", flush=True)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
