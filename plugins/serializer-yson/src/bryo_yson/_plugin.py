"""MoX yson serializer plugin."""
