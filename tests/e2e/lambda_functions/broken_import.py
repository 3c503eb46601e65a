"""A handler module whose import fails, as one with a dependency missing from its layer would."""

import a_module_no_layer_provides  # noqa: F401


def handler(event, context):
    return {}
