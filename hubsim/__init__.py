"""hubsim: a small local Hugging Face Hub for tests and offline LANs.

It serves the part of the Hub's HTTP API that the real `huggingface_hub` client uses to
download a model — model info (`/api/models/<repo>[/revision/<rev>]`), the file tree with
sizes (`/api/models/<repo>/tree/<rev>`), revision resolution (`X-Repo-Commit`) and ranged
downloads (`/<repo>/resolve/<rev>/<file>`, LFS files through a redirect to `/cdn/<sha256>`
as on huggingface.co) — with the Hub's error headers (`X-Error-Code`: RepoNotFound,
GatedRepo, RevisionNotFound, EntryNotFound), private and gated repositories, and a pace
and a connection drop a test can set. Point a client at it with `HF_ENDPOINT`.

It imports nothing of SparkPanel: it stands for an external system.

    python -m hubsim publish --root DIR org/name SOURCE_DIR [--gated] [--token T]
    python -m hubsim serve --root DIR [--host 127.0.0.1] [--port 8900]

docs/hubsim.md has the details.
"""

__version__ = "0.1.0"
