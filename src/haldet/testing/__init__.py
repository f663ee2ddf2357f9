"""What a plugin author tests a detector with: synthetic evidence per signal and the conformance suite
(`check_detector`, also exported as `haldet.check_detector`)."""
