"""The privacy ledger: budget epochs, charges and retrains."""
