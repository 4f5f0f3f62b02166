"""Graph datasets in the service: upload, storage (one blob per graph), deletion requests, erasure."""
