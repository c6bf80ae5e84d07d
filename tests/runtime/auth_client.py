"""A test client: asks its alias's URL for /v1/models without a key, with a wrong one and with
its own (OPENAI_API_KEY), and writes the statuses and sha256 digests of the key and HF_TOKEN it was
given (never the values) to argv[2]. Usage: auth_client.py ENDPOINTS_FILE OUT [ALIAS]."""

import hashlib
import json
import os
import sys
import urllib.error
import urllib.request


def status(url: str, headers: dict) -> int:
    try:
        return urllib.request.urlopen(urllib.request.Request(url + "/models", headers=headers), timeout=10).status
    except urllib.error.HTTPError as err:
        return err.code


def digest(name: str) -> str:
    return hashlib.sha256(os.environ.get(name, "").encode()).hexdigest()


def main() -> None:
    alias = sys.argv[3] if len(sys.argv) > 3 else "small-model"
    url = json.load(open(sys.argv[1]))["models"][alias]["url"]
    key = os.environ["OPENAI_API_KEY"]
    result = {"without": status(url, {}), "wrong": status(url, {"Authorization": "Bearer x"}),
              "mine": status(url, {"Authorization": f"Bearer {key}"}), "key": digest("OPENAI_API_KEY"),
              "hf": digest("HF_TOKEN")}
    with open(sys.argv[2], "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
