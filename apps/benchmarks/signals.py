"""What the benchmarks app tells the rest of the panel (Django signals, so a model never
calls an integration: the API app's webhooks listen in ``apps/api/apps.py``).

``job_finished(sender=Job, job=job)``: a job reached done, cancelled, interrupted or failed
(sent by ``Job.move``, once per change; receivers must not raise).
"""

from django.dispatch import Signal

job_finished = Signal()
