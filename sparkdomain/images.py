"""The official vLLM images: what a host whose admin named no image runs. Pure Python.

Issue 38 (finding 10): an empty image allowlist allowed every image, and a recipe's
container gets the GPU, HF_TOKEN and the team's Hugging Face cache read-write. An empty
allowlist now means these repositories only, by any tag or digest: vLLM's own image on
Docker Hub (`vllm/vllm-openai`, the panel's default) and NVIDIA's NGC build
(`nvcr.io/nvidia/vllm`). The same name on another registry (a mirror, a local one) is
another image: an admin allows it on the host.
"""

from __future__ import annotations

from sparkdomain.flags import IMAGE

OFFICIAL_REPOSITORIES = ("vllm/vllm-openai", "nvcr.io/nvidia/vllm")
OFFICIAL_IMAGES_TEXT = "the official vLLM images (vllm/vllm-openai, nvcr.io/nvidia/vllm)"
# Docker Hub's own names for itself: `docker.io/vllm/vllm-openai` is `vllm/vllm-openai`.
_DOCKER_HUB = ("docker.io/", "index.docker.io/", "registry-1.docker.io/")


def repository(image: str) -> str:
    """The repository an image reference names, without tag or digest, Docker Hub's own
    host spelled out or not: `vllm/vllm-openai` for `docker.io/vllm/vllm-openai:v1@sha256:…`."""
    name = image.partition("@")[0]
    head, colon, tag = name.rpartition(":")
    if colon and "/" not in tag:  # a tag, not a registry's port
        name = head
    for prefix in _DOCKER_HUB:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def is_official_image(image: str) -> bool:
    """A well-formed reference to one of the official vLLM repositories (any tag or digest)."""
    return (
        isinstance(image, str)
        and IMAGE.match(image) is not None
        and repository(image) in OFFICIAL_REPOSITORIES
    )
