from django import forms

from apps.core.models import Notice


class NoticeForm(forms.ModelForm):
    class Meta:
        model = Notice
        fields = ["message", "level"]
        error_messages = {
            "message": {"required": "Write a message: an empty notice tells nobody anything."}
        }
        widgets = {
            "message": forms.TextInput(
                attrs={"placeholder": "e.g. Swapping spark-1 to the 120B recipe at 14:00"}
            )
        }
