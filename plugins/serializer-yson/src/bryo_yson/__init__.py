"""MoX yson serializer."""
