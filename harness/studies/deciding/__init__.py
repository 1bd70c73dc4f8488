"""A study's deciding room: what names a winner once trials have run. calibrated_target (the target
the trials are timed to, measured), race (successive halving over seeds) and race_report, verify
(the race in fresh processes, then the winner's ablation), method_cards (a card per method of the
winner), remeasure and variants (the runs outside the trials they share). It imports the running
room below it (harness/studies), which never imports it."""
