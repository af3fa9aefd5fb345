"""Getting job records into the store: from ``sacct`` and from AcmeTrace CSVs."""
