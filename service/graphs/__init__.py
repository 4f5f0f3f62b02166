"""Graph datasets in the service: upload, storage (one blob per graph), deletion requests, erasure.

The rest of the service branches on the dataset's kind, never on a method name.
"""
