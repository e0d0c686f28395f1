from django import forms

from apps.hosts.models import Host
from apps.recipes.models import Recipe


class RunStartForm(forms.Form):
    recipe = forms.ModelChoiceField(queryset=Recipe.objects.all())
    host = forms.ModelChoiceField(queryset=Host.objects.all())
