from fixedid.train.cli import main

main()
