"""Input: units, the config schema, device profiles, hardware, scenario files and limits.

Everything here turns files into validated config objects; nothing here simulates."""
