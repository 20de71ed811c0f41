"""The `llm` plugin (placeholder until the plugin lands): registers nothing."""
