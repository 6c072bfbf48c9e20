"""A preset -> trained model -> searchable state: typed presets, the pipeline backends, object search."""
