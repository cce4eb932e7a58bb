"""Input: units, the config schema, device profiles, hardware, scenario files (and DeepSpeed
JSON configs read into them), the scenario document and limits.

Everything here turns files into validated config objects; nothing here simulates."""
