"""Datasets: uploads (CSV, NPZ, Parquet) and bundled datasets."""
