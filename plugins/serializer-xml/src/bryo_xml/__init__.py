"""MoX xml serializer."""
