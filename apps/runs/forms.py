from django import forms

from apps.hosts.models import Host
from apps.recipes.models import Recipe


class RunStartForm(forms.Form):
    recipe = forms.ModelChoiceField(queryset=Recipe.objects.all())
    host = forms.ModelChoiceField(queryset=Host.objects.all())
    # Operators: the recipe's name, typed, starts a recipe the planner says does not fit.
    fit_confirmation = forms.CharField(max_length=200, required=False, strip=True)
