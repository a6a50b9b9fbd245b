"""The graph engine: object graphs <-> (GraphDef, State)."""
