from retrieval.apps.cli import main

main()
