"""The photo-folder product: Index (folder sync, catalog, generations, locks), the gallery, evaluation runs."""
