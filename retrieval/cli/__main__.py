from retrieval.cli.main import main

main()
