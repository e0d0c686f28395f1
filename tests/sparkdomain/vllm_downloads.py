"""Run in real vLLM's venv (var/vllm-0.33.0): what vLLM's own default loader downloads for
each repository of a local hub, with `--load-format auto`.

stdin: {"repos": [repo_id, …], "cache": DIR}; stdout (last line): {repo_id: [paths] | {"error"}}.
HF_ENDPOINT points at the hub. The two calls are those of
`DefaultModelLoader._prepare_weights` for "auto": the mistral check through
`list_filtered_repo_files`, then `download_weights_from_hf` with the patterns it chooses
(fall_back_to_pt on, as for every model that does not turn it off)."""

import json
import os
import sys

from vllm.model_executor.model_loader.weight_utils import download_weights_from_hf
from vllm.transformers_utils.repo_utils import list_filtered_repo_files


def downloaded(repo_id: str, cache: str) -> list[str]:
    mistral = len(list_filtered_repo_files(repo_id, ["consolidated*.safetensors"])) > 0
    patterns = ["consolidated*.safetensors"] if mistral else ["*.safetensors", "*.bin", "*.pt"]
    folder = download_weights_from_hf(repo_id, cache, patterns)
    found = []
    for base, _dirs, names in os.walk(folder):
        found += [os.path.relpath(os.path.join(base, n), folder) for n in names]
    return sorted(found)


def main() -> None:
    request = json.loads(sys.stdin.read())
    answers = {}
    for repo_id in request["repos"]:
        try:
            answers[repo_id] = downloaded(repo_id, request["cache"])
        except Exception as exc:  # the answer for that layout, not a crash
            answers[repo_id] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(answers))


main()
