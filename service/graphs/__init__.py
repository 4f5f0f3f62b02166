"""Graph datasets through the service: upload formats, storage, deletion requests and erasure.

The core library holds the graphs and the methods (:mod:`unlearning.data.graphs`,
``graph_node_newton``, ``graph_classification_newton``); this package stores a graph as one
content-addressed blob, validates graph deletion requests against the remaining graph and writes the
remaining graph after every update. The rest of the service reaches it through a few delimited calls and
branches on the dataset's kind (``table``, ``node_graph``, ``graph_collection``), never on a method name.
"""
