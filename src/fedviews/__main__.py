from fedviews.cli import main

main()
