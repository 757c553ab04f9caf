"""Forms of the notification pages: event choices and a new webhook (checked like every delivery)."""

from __future__ import annotations

from django import forms

from notifications import addresses
from notifications.events import KINDS, LABELS

EVENT_CHOICES = [(k, LABELS[k]) for k in KINDS]


class ChoicesForm(forms.Form):
    email_events = forms.MultipleChoiceField(choices=EVENT_CHOICES, required=False,
                                             widget=forms.CheckboxSelectMultiple, label="By email")
    webhook_events = forms.MultipleChoiceField(choices=EVENT_CHOICES, required=False,
                                               widget=forms.CheckboxSelectMultiple, label="To my webhooks")


class WebhookForm(forms.Form):
    url = forms.URLField(max_length=500, assume_scheme="https", label="Webhook URL")

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        try:
            addresses.check(url)  # a new webhook never has allow_private: only an administrator sets it
        except addresses.RefusedUrl as exc:
            raise forms.ValidationError(str(exc)) from None
        return url
