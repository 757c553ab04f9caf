"""The login page and the admin's login form, with the rate limit of ``portal.login_throttle``.

A login refused by the rate limit is answered with status 429 and a message
saying how long to wait; the password is not checked then. The admin's login
form refuses in the same way (its page keeps Django's status 200).

With LDAP login on (portal/ldap_config.py), a login the directory could not
check because it was unreachable says so, rather than "wrong password"; it
still counts as a failure for the rate limit.
"""

from __future__ import annotations

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.http import HttpResponse

from portal import login_throttle

THROTTLED = "throttled"
#: Request attribute set by portal/ldap_backend.py when the directory could not be used.
DIRECTORY_UNAVAILABLE = "gpusched_directory_unavailable"
DIRECTORY_UNAVAILABLE_MESSAGE = (
    "The directory (LDAP) server could not be reached, so directory accounts cannot log in now; "
    "local accounts still can. Try again later, or tell the administrators if it lasts.")


class ThrottleMixin:
    """Refuse to authenticate while the address-and-username is locked out."""

    def clean(self) -> dict:
        username = self.data.get("username", "") if hasattr(self.data, "get") else ""
        locked = login_throttle.lockout(self.request, str(username))
        if locked is not None:
            self.lockout = locked
            raise forms.ValidationError(locked.message, code=THROTTLED)
        return super().clean()

    def get_invalid_login_error(self) -> forms.ValidationError:
        if getattr(self.request, DIRECTORY_UNAVAILABLE, False):
            return forms.ValidationError(DIRECTORY_UNAVAILABLE_MESSAGE, code="directory_unavailable")
        return super().get_invalid_login_error()


class ThrottledAuthenticationForm(ThrottleMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(ThrottleMixin, AdminAuthenticationForm):
    pass


class ThrottledLoginView(LoginView):
    """Django's login view with the rate limit; 429 and a Retry-After header when locked out."""

    authentication_form = ThrottledAuthenticationForm
    redirect_authenticated_user = True

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        response = super().form_invalid(form)
        locked = getattr(form, "lockout", None)
        if locked is not None:
            response.status_code = 429
            response["Retry-After"] = str(locked.retry_after)
        return response
