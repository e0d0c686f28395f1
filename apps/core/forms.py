from django import forms

from apps.core.models import Notice


class NoticeForm(forms.ModelForm):
    class Meta:
        model = Notice
        fields = ["message", "level"]
        widgets = {
            "message": forms.TextInput(
                attrs={"placeholder": "e.g. Swapping spark-1 to the 120B recipe at 14:00"}
            )
        }

    def clean_message(self) -> str:
        message = self.cleaned_data["message"].strip()
        if not message:
            raise forms.ValidationError("Write a message: an empty notice tells nobody anything.")
        return message
