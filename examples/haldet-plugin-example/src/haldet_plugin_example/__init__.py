"""An example haldet plugin: see the package README. Nothing here is imported until haldet loads the entry points."""
