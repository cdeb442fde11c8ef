"""SGLang target kind: pure parts, and checks against real upstream wheels."""
