"""Reports: a sweep's table read back from the tracking store beside the published figures
(tables), the verdicts of its checks (checks) judged against what the cells ran on (measured_on), and
every sweep in one file (reproduction); what they put back into the store goes through writeback."""
