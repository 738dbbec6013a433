"""Session fixtures of the plugin tests (see plugin_models.py for the helpers)."""

from tests.plugins.plugin_models import mm_handle, mm_sig, ort_body  # noqa: F401 - fixtures
