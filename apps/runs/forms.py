from django import forms

from apps.hosts.forms import HostChoiceField
from apps.recipes.models import Recipe


class RunStartForm(forms.Form):
    recipe = forms.ModelChoiceField(queryset=Recipe.objects.all())
    # In service only; a retired host posted anyway is refused by run_start, with why.
    host = HostChoiceField()
    # Operators: the recipe's name, typed, starts a recipe the planner says does not fit.
    fit_confirmation = forms.CharField(max_length=200, required=False, strip=True)
