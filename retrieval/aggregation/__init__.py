"""Local features -> one vector (or sparse histogram) per image: vocabularies, BoW, VLAD, Fisher, normalisations, PCA."""
