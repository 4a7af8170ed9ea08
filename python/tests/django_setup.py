"""Django's settings for the adapter tests: configured once per process (Django allows no
second ``settings.configure``), each test's own values in an ``override_settings`` block, so
the tests run in any order."""

from __future__ import annotations

from typing import Any


def django_settings(**overrides: Any) -> Any:
    """An ``override_settings`` with ``overrides`` over a minimal configuration."""
    import django
    from django.conf import settings
    from django.test import override_settings

    if not settings.configured:
        settings.configure(DEBUG=False, SECRET_KEY="test", ALLOWED_HOSTS=["*"], MIDDLEWARE=[])
        django.setup()
    return override_settings(**overrides)
