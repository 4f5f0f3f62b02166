"""Table models: per-column feature scaling, the held-out quality report, and the wrapper that gives every
table method both (:class:`unlearning.methods.table_model.TableModel`)."""
