from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "apps.runs"
    label = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # The recipe pages ask for what starts measured (apps/recipes/signals.py).
        from apps.recipes import signals as recipe_signals

        # The run's live elements and the hosts' dashboard lines (models are loaded now).
        from apps.runs import live  # noqa: F401

        recipe_signals.plan_corrections.connect(
            _plan_corrections, dispatch_uid="runs.calibration.plan_corrections"
        )
        recipe_signals.plan_checks.connect(_plan_checks, dispatch_uid="runs.calibration.checks")
        recipe_signals.mod_approvals.connect(_mod_approvals, dispatch_uid="runs.mods.approvals")


def _plan_corrections(sender, *, image, arch, flags, recipe=None, **kwargs) -> list:
    from apps.runs.calibration import host_corrections

    return host_corrections(image=image, arch=arch, flags=flags, recipe=recipe)


def _plan_checks(sender, *, recipe, limit, **kwargs) -> list[dict]:
    from apps.runs.calibration import recipe_check_rows

    return recipe_check_rows(recipe, limit)


def _mod_approvals(sender, *, recipe, **kwargs) -> list[dict]:
    from apps.runs.mods import approvals

    return approvals(recipe)
