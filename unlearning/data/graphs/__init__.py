"""Graph data: one node-classification graph and collections of small graphs, with stable string ids,
deletion requests and pickle-free serialisation.

* :mod:`~unlearning.data.graphs.node_graph`: :class:`NodeGraph` (node, edge and node-feature deletions);
* :mod:`~unlearning.data.graphs.collection`: :class:`Graph` and :class:`GraphCollection` (graph and
  graph-node deletions);
* :mod:`~unlearning.data.graphs.requests`: what a deletion request names, and the keys ``edge_key`` /
  ``graph_node_key`` deleted items are reported by;
* :mod:`~unlearning.data.graphs.codecs`: the NPZ and JSON formats;
* :mod:`~unlearning.data.graphs.validation`: checks of uploaded JSON fields and NPZ entries;
* :mod:`~unlearning.data.graphs.structure`: checks and canonical forms shared by the types and loaders;
* :mod:`~unlearning.data.graphs.planetoid`: Cora, Citeseer and PubMed through a restricted unpickler;
* :mod:`~unlearning.data.graphs.tu`: the TU text format of IMDB-BINARY and PROTEINS.
"""
