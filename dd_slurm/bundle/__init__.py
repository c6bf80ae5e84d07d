"""The runtime bundle (content-addressed, checksummed) and staging of attempts."""
