"""Approved mods in the Django admin (admins only): add a mod from a registry or a folder
(its files are snapshotted), review the files, approve it for hosts (apps/runs/mods.py)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from apps.hosts.models import Host
from apps.recipes.models import RecipeRegistry
from apps.runs.models import ApprovedMod
from apps.runs.mods import ModRefused, add_mod, approve, decode
from sparkdomain.mods import shown


class AddModForm(forms.ModelForm):
    """Where the mod's files come from; they are read when the form is saved."""

    registry = forms.ModelChoiceField(
        queryset=RecipeRegistry.objects.all(), required=False,
        help_text="A registry the panel mirrors: its mods folder at the mirrored commit.",
    )  # fmt: skip
    ref = forms.CharField(
        label="mod", max_length=200, required=False,
        help_text="The mod as recipes name it (mods/fix-x or fix-x).",
    )  # fmt: skip
    folder = forms.CharField(
        max_length=500, required=False,
        help_text="Or a folder holding the mod's run.sh, inside the panel machine's mod "
        "folders (SPARKPANEL_MOD_FOLDERS; default var/mods).",
    )  # fmt: skip

    request_user = None

    class Meta:
        model = ApprovedMod
        fields: list[str] = []

    def clean(self):
        data = super().clean()
        if not data.get("registry") and not data.get("folder"):
            raise forms.ValidationError("Choose a registry (and the mod) or give a folder.")
        if data.get("registry") and not data.get("ref"):
            raise forms.ValidationError({"ref": "Name the mod to read from the registry."})
        try:
            self.added = add_mod(
                user=self.request_user, registry=data.get("registry"),
                ref=data.get("ref") or "", folder=data.get("folder") or "",
            )  # fmt: skip
        except ModRefused as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


class ReviewModForm(forms.ModelForm):
    hosts = forms.ModelMultipleChoiceField(
        queryset=Host.objects.all(), required=False, widget=forms.CheckboxSelectMultiple,
        help_text="The Sparks where a start may apply it (Docker hosts).",
    )  # fmt: skip

    class Meta:
        model = ApprovedMod
        fields = ["approved", "hosts"]


@admin.register(ApprovedMod)
class ApprovedModAdmin(admin.ModelAdmin):
    list_display = ["name", "approved", "host_names", "source", "short_digest", "approved_at"]
    list_filter = ["approved"]
    search_fields = ["name", "source"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:  # a class of its own per request: who adds it
            return type("AddModForm", (AddModForm,), {"request_user": request.user})
        return ReviewModForm

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [(None, {"fields": ["registry", "ref", "folder"],
                            "description": "The mod's files are read now and kept: what "
                            "runs is what you review on the next page."})]  # fmt: skip
        return [
            (None, {"fields": ["name", "source", "digest", "added_by", "review"]}),
            ("Approval", {"fields": ["approved", "hosts", "approved_by", "approved_at"],
                          "description": "Approve only after reading every file: run.sh "
                          "runs as the image's user inside the recipe's image before vLLM "
                          "starts, on the hosts ticked."}),
        ]  # fmt: skip

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return ["name", "source", "digest", "added_by", "review", "approved_by", "approved_at"]

    @admin.display(description="files")
    def review(self, obj: ApprovedMod):
        files = decode(obj.files)
        order = sorted(files, key=lambda p: (p != "run.sh", p))
        return format_html_join(
            "", "<h4><code>{}</code> ({} bytes)</h4><pre style='white-space:pre-wrap'>{}</pre>",
            ((path, len(files[path]), shown(files[path])) for path in order),
        )  # fmt: skip

    @admin.display(description="hosts")
    def host_names(self, obj: ApprovedMod) -> str:
        return ", ".join(h.name for h in obj.hosts.all()) or "—"

    @admin.display(description="digest")
    def short_digest(self, obj: ApprovedMod):
        return format_html("<code>{}</code>", obj.digest[:12])

    def save_form(self, request, form, change):
        if not change:  # the add form's clean() snapshotted and saved it (add_mod)
            return form.added
        return super().save_form(request, form, change)

    def save_model(self, request, obj, form, change):
        if not change:
            return
        obj.save()
        if not obj.approved:
            obj.approved_by, obj.approved_at = None, None
            obj.save(update_fields=["approved_by", "approved_at"])

    def save_related(self, request, form, formsets, change):
        if not change:
            return
        super().save_related(request, form, formsets, change)
        mod = form.instance
        if mod.approved:
            approve(mod, user=request.user, hosts=list(mod.hosts.all()))
            names = ", ".join(h.name for h in mod.hosts.all()) or "no host yet"
            messages.info(request, f"{mod.name} may now run on: {names}.")

    def response_add(self, request, obj, post_url_continue=None):
        """Straight to the review: the files, then the approval."""
        messages.info(request, f"{obj.name}: read every file below before approving it.")
        return redirect(reverse("admin:runs_approvedmod_change", args=[obj.pk]))
