from analysis.cli.main import main

main()
