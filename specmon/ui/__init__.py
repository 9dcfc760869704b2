"""The Textual app. The only layer that imports Textual."""
