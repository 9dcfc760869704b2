"""A launch log read: cleaning each piece (clean), the message regexes (signals), the events they carry (events)
and the incremental, tolerant parser that turns bytes into them (logparse)."""
