"""Training of learned policies (imports torch and SB3; never imported by ``policies``)."""
