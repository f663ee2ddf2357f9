"""Executors that run a run's cells elsewhere than in this process (the serial one is
`haldet.flow.run.serial_cells`)."""
