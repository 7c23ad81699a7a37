"""MoX xml serializer plugin."""
