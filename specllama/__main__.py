from .cli_group import main

main()
