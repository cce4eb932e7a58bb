"""``tiersim calibrate``: single-resource micro-benchmarks, model fits, and a host profile writer.

* ``microbench`` measures (memory copy, CPU Adam, file I/O, PCIe and GPU Adam when CUDA is
  present) and returns plain records;
* ``fit`` turns records into the parameters the device profiles use (pure functions on arrays);
* ``profile_writer`` writes a ``kind: host`` profile with the raw records and fit residuals.
"""
