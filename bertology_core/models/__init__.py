"""Models: resolving and loading them with every weight checked, compatibility read from their files, checkpoints, the device."""
