"""Text in and out: numbers as people read them (numbers), reading a user-named text file without trusting it
(textfile) and the one redaction rule (secrets)."""
