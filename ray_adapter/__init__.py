"""The one door to Ray, the runtime a pair of Sparks serves a model on (docs/two-sparks.md).

Django-free and free of the `ray` package itself: the panel never imports Ray (its version
must be the image's, on both Sparks). It builds the `ray start` command line of each side
(`nodes.py`) and reads the cluster through a probe run in the head's own environment
(`probe.py`). The engines (apps/hosts/engines) start what this package describes.
"""
