/* train_help.h: ./train --help: the usage line, the command-line-only switches, every training flag with its default
 * and the model keys of the config file, listed from config.c's option table. */
#ifndef TRAIN_HELP_H
#define TRAIN_HELP_H

/* Prints the help to stdout; prog is argv[0]. */
void train_print_help(const char *prog);

#endif
